"""Forest plots: the file is written and is a valid PNG or SVG, the axis follows the
statistic, and the caption carries the epsilon spent."""

import xml.etree.ElementTree as ElementTree

import matplotlib
import matplotlib.image
import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_forest_plot_png(ctx, tmp_path):
    result = ctx.sql(
        "SELECT region, dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits GROUP BY region "
        "ORDER BY region"
    )
    path = tmp_path / "forest.png"
    figure = result.forest_plot(path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    (ax,) = figure.axes
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["east", "north", "south", "west"]
    captions = " ".join(t.get_text() for t in figure.texts)
    assert "\u03b5 = 1 spent" in captions


def test_forest_plot_svg_of_a_risk_difference(ctx, tmp_path):
    result = ctx.sql(
        "SELECT region, dp_rd_ci(outcome, exposed, 0.5) AS rd FROM visits GROUP BY region"
    )
    path = tmp_path / "forest.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text kept as text
        figure = result.forest_plot(path, title="Risk difference by region")
    root = ElementTree.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = "".join(root.itertext())
    assert "\u03b5 = 0.5 spent" in text
    assert "risk difference" in text
    assert figure.axes[0].get_xscale() == "linear"


def test_forest_plot_needs_an_interval_column(ctx):
    with pytest.raises(ValueError, match="interval"):
        ctx.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits").forest_plot()
