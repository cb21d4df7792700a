from django.apps import AppConfig


class QueuesConfig(AppConfig):
    # Not `queue`: a top-level package of that name shadows the standard library module.
    name = "queues"
    verbose_name = "Work queue"
    default_auto_field = "django.db.models.BigAutoField"
