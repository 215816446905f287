"""The one Jinja environment of the HTML pages, and the page renderer the three of them share.

The report (reports/html.py), the diff (reports/diff_html.py) and the sweep (reports/sweep_html.py)
each extend ``templates/_base.html``, which holds the stylesheet, the one inlined copy of plotly.js,
the page data (``tojson``, sorted keys) and the table-sort script. Autoescaping is on for ``.html``
templates, so user text is escaped unless a renderer marks a fragment ``|safe``.
"""

from __future__ import annotations

import functools

import jinja2

from reports.figures import plotly_js


@functools.cache
def environment() -> jinja2.Environment:
    """The Jinja environment over ``reports/templates`` (built once per process)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        keep_trailing_newline=True,
    )
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "default": str}
    return env


def render_page(template: str, **context) -> str:
    """Render the page ``template`` (one that extends ``_base.html``) with ``context``.

    Passes in plotly.js, inlined once by the base template, with ``</script`` written as
    ``<\\/script`` so that it cannot close its script tag early.
    """
    return (
        environment().get_template(template).render(plotly_js=plotly_js().replace("</script", "<\\/script"), **context)
    )
