"""The terminal summary of one graded submission: a rich table, one row per test."""
from rich.console import Console
from rich.table import Table

from . import feedback

STYLE = {"passed": "green", "failed": "red", "error": "red", "timeout": "yellow"}


def print_summary(scored, language, console=None):
    console = console or Console()
    table = Table(title=feedback.label("summary_title", language), show_lines=False)
    table.add_column("#", justify="right")
    table.add_column(feedback.label("property", language))
    table.add_column(feedback.label("points", language), justify="right")
    table.add_column(feedback.label("status", language))
    for test in scored:
        style = STYLE.get(test.outcome_status, "")
        table.add_row(test.number, test.name, f"{test.score:g} / {test.max_score:g}",
                      f"[{style}]{test.outcome_status}[/{style}]")
    earned = sum(t.score for t in scored)
    possible = sum(t.max_score for t in scored)
    table.add_section()
    table.add_row("", feedback.label("total", language), f"{earned:g} / {possible:g}", "")
    console.print(table)
