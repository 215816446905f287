"""Static checks of a rendered report: no external script or stylesheet tags.

Uses the stdlib HTML parser, which treats script bodies as opaque text, so URLs
inside the inlined plotly.js source are not mistaken for tags.
"""

from html.parser import HTMLParser


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.external = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
            if a.get("src"):
                self.external.append(f"<script src={a['src']}>")
        if tag == "link" and a.get("href", "").startswith(("http:", "https:", "//")):
            self.external.append(f"<link href={a['href']}>")
        if tag in ("img", "iframe") and a.get("src", "").startswith(("http:", "https:", "//")):
            self.external.append(f"<{tag} src={a['src']}>")


def external_resources(html: str) -> list[str]:
    p = _Tags()
    p.feed(html)
    return p.external
