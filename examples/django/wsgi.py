"""The WSGI application: ``gunicorn -c gunicorn.conf.py wsgi:application``."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
application = get_wsgi_application()
