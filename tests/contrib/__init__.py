"""Tests of leasecron.contrib: the integrations with gunicorn, Flask and friends."""
