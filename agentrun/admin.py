from django.contrib import admin

from agentrun.models import ApiKey

# What names a key and whom it is for: the first columns of the list and of the page.
_IDENTITY = ("id", "name", "tenant_id", "role", "run_id", "key_prefix")
_FIELDS = (*_IDENTITY, "key_digest", "created_at", "last_used_at", "revoked_at")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (*_IDENTITY, "created_at", "revoked_at")
    list_filter = ["role", "tenant_id"]
    search_fields = ["id", "name", "tenant_id", "run_id", "key_prefix"]
    fields = _FIELDS
    # Keys are issued by `create_api_key`; the admin shows them and may rename or revoke them.
    readonly_fields = [name for name in _FIELDS if name not in {"name", "revoked_at"}]

    def has_add_permission(self, request: object) -> bool:
        return False
