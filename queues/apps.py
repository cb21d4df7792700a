from django.apps import AppConfig


class QueuesConfig(AppConfig):
    # Not `queue`: a top-level package of that name shadows the standard library module.
    name = "queues"
    verbose_name = "Work queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Sessions sits below queues and cannot import it: its `when_busy=enqueue` goes
        # through the port it names, implemented here (see `sessions.turn_queue`).
        from queues.services.session_turns import SessionTurnQueue
        from sessions.turn_queue import install_turn_queue

        install_turn_queue(SessionTurnQueue())
