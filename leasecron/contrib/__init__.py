"""Integrations with the frameworks and tools our users run leasecron under.

Each module imports its framework only when it is imported itself, so the core
never depends on Flask, gunicorn or prometheus_client.
"""
