"""The spend screen's chart: spend per day over the last 30 days as bars (one colour per model, stacked), with the
daily budget as a line across it when one is set. Drawn by plotext through textual-plotext (a maintained terminal
plotting library and Textual's wrapper of it); this module is imported only when the spend screen opens."""

from __future__ import annotations

import math

from textual.app import RenderResult
from textual_plotext import PlotextPlot

from console.core.spend import NANOS_PER_USD, DailySpend

# One colour per model, in the order the models are listed (plotext's colour names; "+" the bright variant).
MODEL_COLOURS = ("blue+", "orange+", "green+", "magenta+", "cyan+", "yellow+")
BUDGET_COLOUR = "red+"
LABEL_WIDTH = 4  # a day's label and the room around it


def model_colour(index: int) -> str:
    return MODEL_COLOURS[index % len(MODEL_COLOURS)]


class SpendChart(PlotextPlot):
    """Bars of US dollars per day (the x axis the day of the month, today the last bar)."""

    def __init__(self) -> None:
        super().__init__()
        self._labels: list[str] = []  # the days drawn, oldest first

    def render(self) -> RenderResult:
        # The days labelled are chosen here, for the width drawn: plotext's own choice when labels would crowd
        # depends on the sizes it was drawn at before, so the same chart came out differently.
        if self._labels:
            every = max(1, math.ceil(len(self._labels) * LABEL_WIDTH / max(1, self.size.width - 8)))
            ticks = list(range(len(self._labels) - 1, -1, -every))[::-1]  # today always labelled
            self.plt.xticks([tick + 1 for tick in ticks], [self._labels[tick] for tick in ticks])
        return super().render()

    def show(self, spend: DailySpend, daily_budget_usd: float | None, model: str | None = None) -> None:
        """Draw the days of `spend`: every model stacked, or one model alone."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        labels = self._labels = [day.strftime("%d") for day in spend.days]
        models = [name for name in spend.nanos if model is None or name == model]
        series = [[nanos / NANOS_PER_USD for nanos in spend.nanos[name]] for name in models]
        colours = [model_colour(list(spend.nanos).index(name)) for name in models]
        if len(series) == 1:
            plt.bar(labels, series[0], color=colours[0], width=0.6)
        elif series:
            # a colour per series: plotext's hints say one colour, its code takes the list
            plt.stacked_bar(labels, series, color=colours, width=0.6)  # type: ignore[arg-type]
        top = max((sum(day) for day in zip(*series, strict=True)), default=0.0)
        if daily_budget_usd:
            plt.hline(daily_budget_usd, BUDGET_COLOUR)
            top = max(top, daily_budget_usd)
        plt.ylim(0, top * 1.1 if top > 0 else 1.0)
        plt.xlabel("day of the month" + ("" if not daily_budget_usd else " · ─ the daily budget"))
        plt.ylabel("US$")
        self.refresh()
