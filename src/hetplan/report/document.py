"""A tiny document model rendered both as Markdown and as a self-contained HTML page."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

Block = tuple[str, object]


@dataclass
class Document:
    """Headings, paragraphs, bullet lists, tables and images, in order."""

    title: str
    blocks: list[Block] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def para(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def table(self, head: list[str], rows: list[list[str]]) -> None:
        self.blocks.append(("table", (head, rows)))

    def image(self, path: str, alt: str) -> None:
        """``path`` relative to the report's folder."""
        self.blocks.append(("img", (path, alt)))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for kind, value in self.blocks:
            out.extend(_md(kind, value))
            out.append("")
        return "\n".join(out)

    def html(self) -> str:
        body = "\n".join(_html(kind, value) for kind, value in self.blocks)
        return (
            "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
            f"<title>{html.escape(self.title)}</title><style>{CSS}</style></head>\n"
            f"<body><h1>{html.escape(self.title)}</h1>\n{body}\n</body></html>\n"
        )


CSS = (
    "body{font-family:sans-serif;max-width:70em;margin:2em auto;line-height:1.4}"
    "table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;"
    "padding:2px 6px;text-align:right}th{background:#eee}img{max-width:100%}"
    "pre{background:#f4f4f4;padding:0.5em}"
)


def _md(kind: str, value: object) -> list[str]:
    if kind == "h2":
        return [f"## {value}"]
    if kind == "p":
        return [str(value)]
    if kind == "code":
        return ["```", str(value), "```"]
    if kind == "ul":
        assert isinstance(value, list)
        return [f"- {item}" for item in value]
    if kind == "img":
        assert isinstance(value, tuple)
        return [f"![{value[1]}]({value[0]})"]
    assert isinstance(value, tuple)
    head, rows = value
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _html(kind: str, value: object) -> str:
    esc = html.escape
    if kind == "h2":
        return f"<h2>{esc(str(value))}</h2>"
    if kind == "p":
        return f"<p>{esc(str(value))}</p>"
    if kind == "code":
        return f"<pre>{esc(str(value))}</pre>"
    if kind == "ul":
        assert isinstance(value, list)
        return "<ul>" + "".join(f"<li>{esc(str(i))}</li>" for i in value) + "</ul>"
    if kind == "img":
        assert isinstance(value, tuple)
        return f"<p><img src='{esc(value[0])}' alt='{esc(value[1])}'></p>"
    assert isinstance(value, tuple)
    head, rows = value
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{trs}</table>"
