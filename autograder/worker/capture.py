"""What the submission prints, kept up to limits.output_kib per test: the worker's output pipe is
drained while the grader waits, so a chatty submission can neither block nor flood the grader."""
from ..text import clean


class OutputCapture:
    def __init__(self, limit_bytes):
        self.limit = limit_bytes
        self.kept = bytearray()
        self.dropped = 0

    def keep(self, chunk):
        room = max(self.limit - len(self.kept), 0)
        self.kept += chunk[:room]
        self.dropped += max(len(chunk) - room, 0)

    def take(self):
        """What was printed since the last take, as valid text, with how much was cut."""
        text = clean(self.kept.decode("utf-8", "replace"))
        if self.dropped:
            text += f"\n[... {self.dropped} bytes more]"
        self.kept.clear()
        self.dropped = 0
        return text
