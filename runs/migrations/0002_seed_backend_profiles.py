"""Seed the backend profiles (seed migrations 001, 002, 005, 008, 009), plus `scripted`.

Re-running is safe: each profile is upserted, as the seed's `ON CONFLICT DO UPDATE` does.
"""

from django.db import migrations
from django.utils import timezone

CODEX_APP_SERVER = {
    "protocol": "codex-app-server-jsonrpc-stdio",
    "transport": "stdio",
    "command": "codex app-server --listen stdio://",
}

PROFILES = {
    "codex": {
        "capabilities": {**CODEX_APP_SERVER, "models": ["gpt-5.1-codex", "gpt-5.1-codex-mini"],
                         "required_secret_keys": ["auth.json"]},
        "capacity": {"max_concurrent_runs": 4},
    },
    "deepseek": {
        "capabilities": {**CODEX_APP_SERVER, "models": ["deepseek-chat", "deepseek-reasoner"],
                         "required_secret_keys": ["config.toml"]},
        "capacity": {"max_concurrent_runs": 4},
    },
    "minimax-m3": {
        "capabilities": {**CODEX_APP_SERVER, "models": ["MiniMax-M3"],
                         "required_secret_keys": ["config.toml"]},
        "capacity": {"max_concurrent_runs": 4},
    },
    "dsflash-go": {
        "capabilities": {**CODEX_APP_SERVER, "models": ["dsflash-go"],
                         "required_secret_keys": ["auth.json", "config.toml"]},
        "capacity": {"max_concurrent_runs": 4},
    },
    "scripted": {
        "capabilities": {"protocol": "agentrun-scripted", "transport": "in-process",
                         "command": None, "models": ["scripted"], "required_secret_keys": []},
        "capacity": {"max_concurrent_runs": 16},
    },
}


def seed_profiles(apps, schema_editor):
    Backend = apps.get_model("runs", "Backend")
    for profile, values in PROFILES.items():
        Backend.objects.update_or_create(
            profile=profile,
            defaults={**values, "health": {"status": "registered"}, "updated_at": timezone.now()},
        )


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [migrations.RunPython(seed_profiles, migrations.RunPython.noop)]
