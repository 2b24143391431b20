"""MkDocs hooks: repository files the docs link to, and pages included from outside docs/.

The docs are read in two places: on GitHub, where a link such as ``../examples/dra/kubelet-plugin.yaml``
opens the file, and on the built site, which holds only docs/. So a link that leaves docs/ stays a link in
the Markdown and becomes the file's path, in code, on the site; a link to a file that does not exist is a
warning, which ``mkdocs build --strict`` turns into a failure. ``<!-- include: PATH -->`` puts a file of the
repository (the example plugin's guide) into a page, its links rewritten the same way.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repository_links")

INCLUDE = re.compile(r"^<!-- include: (\S+) -->$", re.M)
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _outside_link(match: re.Match[str], folder: Path, page: Path, docs: Path, repo: Path, where: str) -> str:
    target = match.group("target")
    if target.startswith(("http://", "https://", "mailto:", "#")):
        return match.group(0)
    path = target.split("#", 1)[0]
    resolved = (folder / path).resolve()
    if resolved.is_relative_to(docs):
        if folder == page:
            return match.group(0)  # a page of the site: MkDocs checks it
        anchor = target[len(path):]
        return f"[{match.group('text')}]({os.path.relpath(resolved, page)}{anchor})"
    if not resolved.exists() or not resolved.is_relative_to(repo):
        log.warning("%s links to %s, which is not a file of the repository", where, target)
        return match.group(0)
    text = match.group("text")
    shown = resolved.relative_to(repo).as_posix()
    return text if text.strip("`") == path or text.strip("`") == shown else f"{text} (`{shown}`)"


def rewrite_links(markdown: str, folder: Path, page: Path, docs: Path, repo: Path, where: str) -> str:
    """Links that leave docs/ become the repository path they name; code blocks are left alone.

    ``folder`` is where the text's links start from (the page's folder, or an included file's), ``page`` the
    folder of the page it ends up in.
    """
    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            line = LINK.sub(lambda m: _outside_link(m, folder, page, docs, repo, where), line)
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    source = Path(page.file.abs_src_path).resolve()

    def include(match: re.Match[str]) -> str:
        path = (repo / match.group(1)).resolve()
        if not path.is_file() or not path.is_relative_to(repo):
            log.warning("%s includes %s, which is not a file of the repository", page.file.src_path, match.group(1))
            return match.group(0)
        return rewrite_links(path.read_text(), path.parent, source.parent, docs, repo, match.group(1))

    markdown = rewrite_links(markdown, source.parent, source.parent, docs, repo, page.file.src_path)
    return INCLUDE.sub(include, markdown)


# Pages other work adds to docs/: in the nav under their section as soon as they exist, never a broken entry.
OPTIONAL_PAGES: dict[str, list[tuple[str, str]]] = {
    "Scheduler authors": [("Embedding in a scheduler", "embedding.md")],
    "Operators": [
        ("Operating a node", "operators.md"),
        ("MIG", "mig.md"),
        ("Defragmentation from the command line", "defrag.md"),
        ("Fake vendor libraries", "fakes.md"),
    ],
}


def _listed(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_listed(v) for v in nav.values()))
    if isinstance(nav, list):
        return set().union(*(_listed(v) for v in nav)) if nav else set()
    return set()


def on_config(config: Any) -> Any:
    docs = Path(config["docs_dir"])
    nav = config["nav"] or []
    listed = _listed(nav)
    for entry in nav:
        if not isinstance(entry, dict):
            continue
        for section, pages in entry.items():
            if section in OPTIONAL_PAGES and isinstance(pages, list):
                pages.extend({title: path} for title, path in OPTIONAL_PAGES[section]
                             if path not in listed and (docs / path).is_file())
    return config
