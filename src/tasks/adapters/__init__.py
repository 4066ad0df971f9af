"""Task families over other packages' environments (reasoning-gym, TextArena, verifiers,
Gymnasium environments of text): each wraps the package's own objects and scorer, the
package imported through `src.tasks.optional_packages`. The project's own task families
are in `src.tasks.instance`."""
