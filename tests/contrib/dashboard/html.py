"""A small HTML reader for the dashboard's tests: the page as a tree, found by tag, class and attribute.

The pages are checked as a browser would read them: parsed, with entities
decoded. A text that reads ``<script>`` in :attr:`Node.text` was escaped in
the HTML; one that came through unescaped would be an element instead, and
:meth:`Node.find_all` finds it (``page.find_all("script")`` lists only the
dashboard's own script).
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Dict, List, Optional

#: Elements that never have children (no end tag).
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    """An element: its ``tag``, ``attrs`` (decoded), children and text."""

    def __init__(self, tag: str, attrs: Dict[str, str], parent: Optional["Node"]) -> None:
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: List["Node"] = []
        self.parts: List[object] = []  # text and child nodes, in order

    @property
    def classes(self) -> List[str]:
        """The element's classes."""
        return self.attrs.get("class", "").split()

    @property
    def text(self) -> str:
        """All the text inside, as a browser shows it (whitespace runs as one space)."""
        pieces: List[str] = []
        for part in self.parts:
            pieces.append(part.text if isinstance(part, Node) else str(part))
        return " ".join(" ".join(pieces).split())

    @property
    def raw_text(self) -> str:
        """All the text inside, as it stands (for ``<pre>``)."""
        return "".join(part.raw_text if isinstance(part, Node) else str(part) for part in self.parts)

    def find_all(self, tag: str = "*", cls: Optional[str] = None, **attrs: str) -> List["Node"]:
        """Every element below with ``tag`` (``*``: any), class ``cls`` and the attributes given
        (``data_job="x"`` stands for ``data-job="x"``), in document order."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        found: List[Node] = []
        for child in self.children:
            if (tag in ("*", child.tag) and (cls is None or cls in child.classes)
                    and all(child.attrs.get(k) == v for k, v in wanted.items())):
                found.append(child)
            found.extend(child.find_all(tag, cls, **attrs))
        return found

    def find(self, tag: str = "*", cls: Optional[str] = None, **attrs: str) -> "Node":
        """The first such element; the test fails when there is none."""
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls!r} {attrs}> in <{self.tag} {self.attrs}>"
        return found[0]

    def __repr__(self) -> str:
        return f"<{self.tag} {self.attrs}>"


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: List[tuple]) -> None:  # type: ignore[type-arg]
        node = Node(tag, {name: value or "" for name, value in attrs}, self.current)
        self.current.children.append(node)
        self.current.parts.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs: List[tuple]) -> None:  # type: ignore[type-arg]
        node = Node(tag, {name: value or "" for name, value in attrs}, self.current)
        self.current.children.append(node)
        self.current.parts.append(node)

    def handle_endtag(self, tag: str) -> None:
        node: Optional[Node] = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"</{tag}> closes nothing"
        self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.parts.append(data)


def parse(html: str) -> Node:
    """The page as a tree of :class:`Node`."""
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root
