"""The ticks table (made by ``manage.py makemigrations ticks``)."""
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Tick",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slot_ms", models.BigIntegerField()),
                ("attempt", models.IntegerField()),
                ("reason", models.CharField(max_length=20)),
                ("runner", models.CharField(max_length=200)),
                ("outcome", models.CharField(default="running", max_length=20)),
                ("started", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
