"""The project's own task families; their module paths are what configs name
(`src.tasks.instance.db_bench.task_single_skill`). Adapters of other packages'
environments are in `src.tasks.adapters`."""
