"""The test project's app: a model, and a ``cron.py`` whose job and task use it."""
