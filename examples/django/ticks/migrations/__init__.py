"""The app's migrations (python manage.py makemigrations ticks)."""
