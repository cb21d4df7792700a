from django.apps import AppConfig


class CompatOpenAIConfig(AppConfig):
    name = "compat_openai"
    verbose_name = "OpenAI Agents API compatibility"
    default_auto_field = "django.db.models.BigAutoField"
