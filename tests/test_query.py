"""The issue-text extractor (retrieval/query.py) on real issue shapes."""

from __future__ import annotations

from retrieval.query import Frame, parse_query

# Shapes taken from real reports (SWE-bench issues of sphinx, pytest, xarray; commit messages of
# click), shortened.
SPHINX_TRACEBACK = """\
autodoc: crashes on a class with a __signature__ property

```
Exception occurred:
  File "/usr/lib/python3.9/site-packages/sphinx/ext/autodoc/__init__.py", line 1277, in format_args
    sig = inspect.signature(self.object, bound_method=False)
  File "/usr/lib/python3.9/site-packages/sphinx/util/inspect.py", line 512, in signature
    signature = inspect.signature(subject)
TypeError: 'property' object is not callable
```
The full traceback has been saved in /tmp/sphinx-err-1234.log
"""

PYTEST_FAILURE = """\
exception serialization should include chained exceptions

when run with xdist:
```
____________ test_chained_exception_with_from ____________
[gw0] linux -- Python 3.6.7 /home/user/.venv/bin/python3

    def test_chained_exception_with_from():
>               raise ValueError(13) from e2
E               ValueError: 13

basic/test_basic.py:84: ValueError
```
see `BaseReport._to_json` in src/_pytest/reports.py
"""

XARRAY_PROSE = """\
DataArray.quantile does not honor `keep_attrs`

#### MCVE Code Sample
```python
import xarray as xr
da = xr.DataArray([0, 0], dims="x", attrs={'units':'K'})
out = da.quantile(.9, dim='x', keep_attrs=True)
out.attrs
```
returns `OrderedDict()`; expected the units. Calling xr.core.variable.Variable.quantile directly
drops them as well.
"""

COMMIT = "read1 calls into read now but line buffering gets enabled."

JS_STACK = """\
TypeError: Cannot read properties of undefined (reading 'map')
    at renderList (src/components/List.tsx:42:17)
    at App (src/App.tsx:10:5)
"""


def test_python_traceback_frames_paths_and_error():
    q = parse_query(SPHINX_TRACEBACK)
    assert Frame("/usr/lib/python3.9/site-packages/sphinx/ext/autodoc/__init__.py", 1277,
                 "format_args") in q.frames
    assert ("/usr/lib/python3.9/site-packages/sphinx/util/inspect.py", 512) in q.paths
    assert "format_args" in q.identifiers and "signature" in q.identifiers
    assert "TypeError" in q.exceptions
    assert any("object is not callable" in e for e in q.errors)
    # the traceback is code: its words do not crowd the prose
    assert "crashes" in q.prose_terms and "format" in q.code_terms
    assert "format" not in q.prose_terms


def test_pytest_failure_locations_and_named_code():
    q = parse_query(PYTEST_FAILURE)
    assert Frame("basic/test_basic.py", 84) in q.frames
    assert ("src/_pytest/reports.py", None) in q.paths
    assert "BaseReport._to_json" in q.identifiers
    assert q.identifiers.index("BaseReport._to_json") < q.identifiers.index("ValueError")
    assert "serialization" in q.prose_terms


def test_code_blocks_and_dotted_names_in_prose():
    q = parse_query(XARRAY_PROSE)
    assert "DataArray.quantile" in q.identifiers
    assert "keep_attrs" in q.identifiers
    assert "xr.core.variable.Variable.quantile" in q.identifiers
    # a call in a code block is code; `import` and `out` are not names worth looking up
    assert "da.quantile" in q.identifiers
    assert "import" not in q.identifiers
    assert "quantile" in q.code_terms and "honor" in q.prose_terms
    assert q.frames == () and q.errors == ()


def test_plain_commit_message_has_prose_and_digit_names():
    q = parse_query(COMMIT)
    assert q.is_short
    assert "read1" in q.identifiers  # a letter-digit name is code
    assert {"buffering", "enabled"} <= set(q.terms)
    assert q.paths == ()


def test_javascript_stack_locations():
    q = parse_query(JS_STACK)
    assert Frame("src/components/List.tsx", 42) in q.frames
    assert ("src/App.tsx", 10) in q.paths
    assert "renderList" in q.identifiers


def test_urls_are_not_paths_or_names():
    q = parse_query("See https://github.com/pallets/click/issues/123 and docs.python.org/3/x.html")
    assert all("github.com" not in p for p, _ in q.paths)
    assert all("github" not in i for i in q.identifiers)


def test_parse_is_total_on_odd_input():
    for text in ("", "   ", "`", "```", "File \"x\", line", "a" * 10000, "\x00\udcff"):
        q = parse_query(text)
        assert q.text == text


XARRAY_TEMPLATE = """\
weighted mean gives wrong results with boolean weights
<!-- A short summary of the issue, if appropriate -->

#### MCVE Code Sample
```python
dta.weighted(wgt).mean()
```
#### Versions

<details><summary>Output of <tt>xr.show_versions()</tt></summary>

INSTALLED VERSIONS
------------------
commit: None
python: 3.7.6 | packaged by conda-forge
libhdf5: 1.10.6
netCDF4: 1.5.3
pydap: None
</details>
"""

SPHINX_TEMPLATE = """\
**Describe the bug**
docstring default arg is broken in html.

**Expected behavior**
A clear and concise description of what you expected to happen.
`add_lines(lines, color=(1, 1, 1))`

**Environment info**
- OS: [e.g. Unix/Linux/Mac/Win/other with version] Linux
- Python version: [e.g. 3.7.1] 3.7
- Sphinx extensions:  [e.g. sphinx.ext.autodoc, recommonmark] sphinx.ext.autodoc

**Additional context**
Add any other context about the problem here.
"""


def test_issue_template_boilerplate_is_left_out():
    q = parse_query(XARRAY_TEMPLATE)
    # the version dump names packages of the reporter's machine, not the code
    assert not {"libhdf5", "pydap", "netcdf4", "show_versions"} & set(q.terms)
    assert "xr.show_versions" not in q.identifiers
    assert {"weighted", "mean", "boolean"} <= set(q.terms)
    assert "short" not in q.terms  # the template's own comment
    s = parse_query(SPHINX_TEMPLATE)
    assert "sphinx.ext.autodoc" not in s.identifiers and "recommonmark" not in s.terms
    assert "concise" not in s.terms and "context" not in s.terms
    assert "add_lines" in s.identifiers and "docstring" in s.terms


def test_code_that_looks_like_settings_is_kept():
    q = parse_query("Setting these breaks it:\n```\na = 1\nb = 2\nc = 3\n```\nsee `frobnicate`")
    assert {"frobnicate"} <= set(q.identifiers)
    assert "=" in q.code and "b" in q.code
