"""TeX in the gallery's prose, drawn offline at build time, and its Markdown.

``$...$`` (inline) and ``$$...$$`` (display) are found by mdit_py_plugins' ``dollarmath`` (in markdown-it-py, which
also renders the Markdown) and drawn as inline SVG by matplotlib's mathtext (:func:`tex_svg`): no script, no font,
nothing fetched. A ``$`` opens math only when a non-space follows it and no word character precedes it, and closes
only when a non-space precedes it and no word character follows it (pandoc's rule), so "$5 and $10" stays text; ``\\$``
is a dollar sign and a `code span` is left as it is. :func:`with_math` returns :class:`markupsafe.Markup`, the only
way rendered HTML enters the gallery's autoescaped template.
"""

from __future__ import annotations

import functools
import html
import re

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.dollarmath.index import math_inline_dollar

_MATHTEXT_DIALECT = (  # LaTeX spellings mathtext lacks -> what it has (same glyphs)
    (r"\\le(?![a-zA-Z])", r"\\leq"), (r"\\ge(?![a-zA-Z])", r"\\geq"), (r"\\[lr]vert(?![a-zA-Z])", "|"),
    (r"\\[lr]Vert(?![a-zA-Z])", r"\\Vert"), (r"\\[bB]igg?[lr]?(?![a-zA-Z])", ""),
    (r"\\[td]frac(?![a-zA-Z])", r"\\frac"), (r"\\sqrt\s+([A-Za-z0-9])", r"\\sqrt{\1}"),
    (r"\\qquad(?![a-zA-Z])", r"\\quad\\quad"))
_EM = 100.0  # mathtext is laid out at this font size; the SVG's units are 1/_EM em


def _mathtext_dialect(tex: str) -> str:
    """``tex`` with the few LaTeX commands matplotlib's mathtext does not know rewritten to ones it does
    (``\\le`` -> ``\\leq``, ``\\lVert`` -> ``\\Vert``, ``\\big(`` -> ``(``, ``\\tfrac`` -> ``\\frac``, ...)."""
    for pattern, repl in _MATHTEXT_DIALECT:
        tex = re.sub(pattern, repl, tex)
    return " ".join(tex.split())


def _svg_path(verts, codes) -> str:
    """A matplotlib path (y up) as an SVG path ``d`` (y down), coordinates to 0.1 unit."""
    from matplotlib.path import Path as MplPath

    letter = {MplPath.MOVETO: "M", MplPath.LINETO: "L", MplPath.CURVE3: "Q", MplPath.CURVE4: "C"}
    out = []
    for points, code in MplPath(verts, codes).iter_segments(simplify=False, curves=True):
        if code == MplPath.CLOSEPOLY:
            out.append("Z")
            continue
        xy = points.reshape(-1, 2)
        out.append(letter[code] + " ".join(f"{x:.1f} {-y:.1f}" for x, y in xy))
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def tex_svg(tex: str, display: bool = False) -> str | None:
    """TeX math (without its dollars) as an inline ``<svg class='math'>`` whose size is in em, so it scales with the
    text around it; its baseline sits on the line's (``vertical-align`` = minus its depth); drawn in the text's colour;
    the TeX is its accessible name. None when mathtext cannot lay it out."""
    import matplotlib
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    source = f"${_mathtext_dialect(tex)}$"
    with matplotlib.rc_context({"mathtext.fontset": "dejavusans"}):
        conv, prop = TextToPath(), FontProperties(family="DejaVu Sans", size=_EM)
        try:
            width, height, depth = conv.get_text_width_height_descent(source, prop, ismath=True)
            verts, codes = conv.get_text_path(prop, source, ismath=True)
        except (ValueError, RuntimeError):
            return None
    pad = 0.04 * _EM  # glyphs overshoot their box a little (italic x starts left of 0)
    w, h = width + 2 * pad, height + 2 * pad
    style = f"vertical-align:{-(depth + pad) / _EM:.3f}em" + (";display:block;margin:.5em auto" if display else "")
    return (f"<svg class='math{' display' if display else ''}' role='img' aria-label='{html.escape(tex)}' "
            f"xmlns='http://www.w3.org/2000/svg' width='{w / _EM:.3f}em' height='{h / _EM:.3f}em' "
            f"viewBox='{-pad:.1f} {-(height - depth) - pad:.1f} {w:.1f} {h:.1f}' style='{style}'>"
            f"<path fill='currentColor' d='{_svg_path(verts, codes)}'/></svg>")


def _math_html(tex: str, display: bool) -> str:
    """The SVG of :func:`tex_svg`, or the TeX as code (no dollars) where mathtext cannot lay it out."""
    return tex_svg(tex.strip(), display) or f"<code class='tex'>{html.escape(tex.strip())}</code>"


def _pandoc_dollars(rule):
    """dollarmath's inline rule, refusing a ``$`` with a word character right before the opening one or right after
    the closing one (pandoc's rule: "US$5", "$x$th" and "$10; ... `$x$`" are not math)."""
    def math_inline(state, silent: bool) -> bool:
        start, src = state.pos, state.src
        if start and re.match(r"\w", src[start - 1]) or not rule(state, True):
            return False
        end, state.pos = state.pos, start  # the silent pass measured the span; put the cursor back
        return not (end < len(src) and re.match(r"\w", src[end])) and rule(state, silent)
    return math_inline


def _render_math(self, tokens, idx, options, env) -> str:
    return _math_html(tokens[idx].content, display=tokens[idx].type != "math_inline")


def _parser(preset: str) -> MarkdownIt:
    """markdown-it with dollarmath (inline ``$$`` as display math, no labels) whose math renders as :func:`tex_svg`."""
    md = MarkdownIt(preset, {"html": False}).use(dollarmath_plugin, allow_labels=False, allow_space=False,
                                                 allow_digits=False, allow_blank_lines=False, double_inline=True)
    md.inline.ruler.at("math_inline", _pandoc_dollars(math_inline_dollar(False, False, True)))
    for kind in ("math_inline", "math_inline_double", "math_block"):
        md.add_render_rule(kind, _render_math)
    return md


_MARKDOWN = _parser("commonmark").enable("table")
# plain text (titles, captions, claims): only math, ``\$`` (and markdown's other backslash escapes) and code spans,
# which are left as written, backticks included
_PLAIN = _parser("zero").enable(["escape", "backticks"])
_PLAIN.add_render_rule("code_inline", lambda self, tokens, idx, options, env: escapeHtml(
    tokens[idx].markup + tokens[idx].content + tokens[idx].markup))


def with_math(text: str, markdown: bool = False) -> Markup:
    """``text`` as HTML (Markup): escaped -- or, with ``markdown``, rendered by markdown-it (CommonMark and tables, raw
    HTML escaped) -- with every TeX span drawn by :func:`tex_svg`. The math is parsed as its own token, so ``_`` and
    ``*`` inside it are not emphasis and ``<`` is not a tag; ``\\$`` stays a literal dollar sign."""
    return Markup(_MARKDOWN.render(text) if markdown else _PLAIN.renderInline(text))
