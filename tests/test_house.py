"""The rules of the house, read from the source with ast (nothing here imports JAX).

Layers: the foundation packages (core, sharding, backends, rewards) import nothing
above them, config knows nothing of training or planning, train nothing of the
planner or the experiments, the library nothing of benchmarks/, and no two packages
or modules import each other, directly or round a longer circle. A lazy import inside
a function counts as much as one at the top: it is the same dependency, only paid later.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'graft_jax'

# Packages at the bottom: each may import only from this set.
FOUNDATION = ('core', 'sharding', 'backends', 'rewards')
# package -> packages it must never import.
FORBIDDEN = {
    'config': ('train', 'plan'),
    'train': ('plan', 'experiments'),
}
TRAIN_MAX_LINES = 3_700
FILE_MAX_LINES = 500
DOC_CAPS = {'README.md': 300, 'BENCHMARKS.md': 250}

# A measured time, rate or utilisation: a number with a unit of time, throughput or
# MFU. A docstring says why; the numbers of one machine on one day go to BENCHMARKS.md.
TIMING = re.compile(
    r'(?<![\w.])\d+(?:\.\d+)?\s*'
    r'(?:ms|µs|us|s|sec|seconds|(?:tokens|tok|samples|steps|it)/s|[GMT]i?B/s|%\s*MFU)'
    r'(?![\w/])')


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix('').parts)
  if parts[-1] == '__init__':
    parts = parts[:-1]
  return '.'.join(parts)


def _sources() -> dict[str, pathlib.Path]:
  return {_module_name(p): p for p in sorted(PACKAGE.rglob('*.py'))}


def _imported(path: pathlib.Path, module: str, modules) -> set[str]:
  """The graft_jax modules `module` imports anywhere in its file, resolved to modules."""

  def resolve(name):
    while name and name not in modules:
      name = name.rpartition('.')[0]
    return name

  is_package = path.name == '__init__.py'
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      found.update(resolve(a.name) for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = module.split('.') if is_package else module.split('.')[:-1]
        base = base[:len(base) - node.level + 1]
        target = '.'.join(base + ([node.module] if node.module else []))
      else:
        target = node.module or ''
      # `from pkg import sub` depends on pkg.sub when sub is a module.
      found.update(resolve(f'{target}.{a.name}') for a in node.names)
  return {m for m in found if m.startswith('graft_jax.') and m != module}


def _module_graph() -> dict[str, set[str]]:
  modules = _sources()
  return {m: _imported(p, m, modules) for m, p in modules.items()}


def _package(module: str) -> str:
  return module.split('.')[1]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one member (Tarjan, iterative)."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []
  for start in sorted(graph):
    if start in index:
      continue
    work = [(start, iter(sorted(graph[start])))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
      node, edges = work[-1]
      nxt = next(edges, None)
      if nxt is not None:
        if nxt not in index:
          index[nxt] = low[nxt] = len(index)
          stack.append(nxt)
          on_stack.add(nxt)
          work.append((nxt, iter(sorted(graph.get(nxt, ())))))
        elif nxt in on_stack:
          low[node] = min(low[node], index[nxt])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        component = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          component.append(member)
          if member == node:
            break
        if len(component) > 1:
          found.append(sorted(component))
  return found


def _package_edges(graph) -> dict[str, dict[str, list[str]]]:
  """package -> imported package -> the 'a -> b' module imports that make the edge."""
  edges: dict[str, dict[str, list[str]]] = {}
  for module, targets in graph.items():
    for target in sorted(targets):
      if _package(module) != _package(target):
        edges.setdefault(_package(module), {}).setdefault(_package(target), []).append(
            f'{module} -> {target}')
  return edges


def test_the_import_reader_sees_relative_lazy_and_from_package_imports(tmp_path):
  pkg = tmp_path / 'graft_jax'
  (pkg / 'a').mkdir(parents=True)
  (pkg / 'b').mkdir()
  for f in ('__init__.py', 'a/__init__.py', 'b/__init__.py', 'b/y.py', 'b/z.py'):
    (pkg / f).write_text('')
  (pkg / 'a' / 'x.py').write_text(
      'from graft_jax import b\n'
      'def f():\n'
      '  from graft_jax.b import y  # lazy\n'
      'from ..b.z import thing\n')
  modules = {'graft_jax', 'graft_jax.a', 'graft_jax.a.x', 'graft_jax.b', 'graft_jax.b.y',
             'graft_jax.b.z'}
  assert _imported(pkg / 'a' / 'x.py', 'graft_jax.a.x', modules) == {
      'graft_jax.b', 'graft_jax.b.y', 'graft_jax.b.z'}
  assert _circles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
  assert _circles({'a': {'b'}, 'b': set()}) == []


def test_foundation_packages_import_nothing_above_them():
  edges = _package_edges(_module_graph())
  bad = [line for pkg in FOUNDATION for target, lines in edges.get(pkg, {}).items()
         if target not in FOUNDATION for line in lines]
  assert not bad, '\n'.join(bad)


@pytest.mark.parametrize('package', sorted(FORBIDDEN))
def test_package_stays_below(package):
  edges = _package_edges(_module_graph()).get(package, {})
  bad = [line for target in FORBIDDEN[package] for line in edges.get(target, ())]
  assert not bad, '\n'.join(bad)


def test_no_import_circle_between_packages():
  edges = _package_edges(_module_graph())
  circles = _circles({p: set(t) for p, t in edges.items()})
  detail = [line for c in circles for p in c for t in edges[p] if t in c for line in edges[p][t]]
  assert not circles, f'{circles}\n' + '\n'.join(detail)


def test_no_import_circle_between_modules():
  graph = _module_graph()
  circles = _circles(graph)
  assert not circles, '\n'.join(' <-> '.join(c) for c in circles)


def _benchmark_imports(tree) -> list[str]:
  """The modules under benchmarks/ that a file imports, anywhere in it."""
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
      names.append(node.module or '')
  return [n for n in names if n.split('.')[0] == 'benchmarks']


def test_the_library_never_imports_the_benchmarks():
  # benchmarks/ (the toy benchmark among them) is built on the library, not part of it.
  assert _benchmark_imports(ast.parse(
      'import benchmarks.speed\ndef f():\n  from benchmarks.toy import costs\n'
      'from graft_jax import benchmarks_x')) == ['benchmarks.speed', 'benchmarks.toy']
  bad = [f'{p.relative_to(ROOT)}: {n}' for p in sorted(PACKAGE.rglob('*.py'))
         for n in _benchmark_imports(ast.parse(p.read_text()))]
  assert not bad, '\n'.join(bad)


def _method_comparisons(tree) -> list[int]:
  """Lines comparing `<something>.method` with == / != / in: a method's name tested."""
  lines = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      sides = [node.left, *node.comparators]
      if any(isinstance(s, ast.Attribute) and s.attr == 'method' for s in sides):
        lines.append(node.lineno)
  return lines


def test_no_method_name_tests_outside_the_methods():
  assert _method_comparisons(ast.parse("if cfg.method == 'hacpo': pass")) == [1]
  assert _method_comparisons(ast.parse("ok = 'graft' != self.cfg.method")) == [1]
  methods = PACKAGE / 'train' / 'methods'
  bad = [f'{p.relative_to(ROOT)}:{line}' for p in sorted(PACKAGE.rglob('*.py'))
         if methods not in p.parents for line in _method_comparisons(ast.parse(p.read_text()))]
  assert not bad, 'ask the method instead of testing its name:\n' + '\n'.join(bad)


def _lines(path: pathlib.Path) -> int:
  return len(path.read_text().splitlines())


def test_train_package_cap():
  total = sum(_lines(p) for p in (PACKAGE / 'train').rglob('*.py'))
  assert total <= TRAIN_MAX_LINES, f'graft_jax/train is {total} lines (cap {TRAIN_MAX_LINES})'


def test_no_package_file_over_the_cap():
  bad = [f'{p.relative_to(ROOT)}: {_lines(p)}' for p in sorted(PACKAGE.rglob('*.py'))
         if _lines(p) > FILE_MAX_LINES]
  assert not bad, f'over {FILE_MAX_LINES} lines:\n' + '\n'.join(bad)


@pytest.mark.parametrize('name', sorted(DOC_CAPS))
def test_doc_caps(name):
  assert _lines(ROOT / name) <= DOC_CAPS[name], f'{name}: {_lines(ROOT / name)} lines'


def _timings(source: str) -> list[str]:
  tree = ast.parse(source)
  hits = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=False) or ''
      hits += [m.group(0) for m in TIMING.finditer(doc)]
  return hits


def test_the_timing_pattern_flags_measurements_only():
  measured = ('"""four calls took 2.28 s where one took 2.77 s."""\n'
              'def f():\n  """Runs at 1,2 3.5 tokens/s, 41% MFU, 900 GB/s, 12 ms a step."""\n')
  assert _timings(measured) == ['2.28 s', '2.77 s', '3.5 tokens/s', '41% MFU', '900 GB/s', '12 ms']
  plain = ('"""Two steps, 8 samples, 3 stages, shapes (4, 128), a 1e-3 step; see s 2."""\n'
           'def f():\n  """A timeout in seconds; 16 rows/step, version 2.5.1, 10%."""\n')
  assert _timings(plain) == []


def test_no_measured_timings_in_docstrings():
  bad = [f'{p.relative_to(ROOT)}: {hit}' for p in sorted(PACKAGE.rglob('*.py'))
         for hit in _timings(p.read_text())]
  assert not bad, 'timings belong in BENCHMARKS.md:\n' + '\n'.join(bad)
