"""The example's app: a model (models.py) and a job that records each of its runs in it (cron.py)."""
