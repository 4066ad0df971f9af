"""EconAgent's economy (households choosing work and consumption each month) as a task."""
