from django.apps import AppConfig


class DispatchConfig(AppConfig):
    name = "dispatch"
    verbose_name = "Runner dispatch"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dispatch import listener

        listener.install()  # the worker's LISTEN pickup (issue 18)
