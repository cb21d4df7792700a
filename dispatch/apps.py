from django.apps import AppConfig


class DispatchConfig(AppConfig):
    name = "dispatch"
    verbose_name = "Runner dispatch"
    default_auto_field = "django.db.models.BigAutoField"
