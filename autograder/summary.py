"""The terminal summary of one graded submission: a rich table, one row per test."""
from rich.console import Console
from rich.table import Table

from . import feedback

STYLE = {"passed": "green", "failed": "red", "error": "red", "timeout": "yellow"}


def print_summary(card, language, console=None):
    """The table of a scoring.Scorecard: number, name, points and outcome of each test, then the total."""
    console = console or Console()
    table = Table(title=feedback.label("summary_title", language), show_lines=False)
    table.add_column("#", justify="right")
    table.add_column(feedback.label("property", language))
    table.add_column(feedback.label("points", language), justify="right")
    table.add_column(feedback.label("status", language))
    words = feedback.catalog(language)["report"]  # the pages' words for each status
    for test in card:
        style = STYLE.get(test.outcome_status, "")
        table.add_row(test.number, test.name, f"{test.score:g} / {test.max_score:g}",
                      f"[{style}]{words.get(test.outcome_status, test.outcome_status)}[/{style}]")
    table.add_section()
    table.add_row("", feedback.label("total", language), f"{card.earned:g} / {card.possible:g}", "")
    console.print(table)
