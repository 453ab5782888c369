"""The rules of the house, read from the source with ast (nothing here imports JAX).

Floors: every module is on a floor (`FLOORS`) and imports nothing on a higher one; no
two packages or modules import each other, directly or round a longer circle. A lazy
import inside a function counts as much as one at the top: it is the same dependency,
only paid later. Only a method's own module tests which method it is; no function
runs past `FUNCTION_MAX_LINES`; comments and docstrings carry no measured timings.
Each rule's reader (tests/house_rules.py) is shown a violation before it reads the code.
"""

import ast
import pathlib

import pytest

from tests import house_rules as rules

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'graft_jax'
# What the rules read beyond the library: its configs, launchers and benchmarks.
SOURCES = ('graft_jax', 'configs', 'launch', 'benchmarks')

# Every package and top-level module of graft_jax, with its floor: a module imports only
# modules on its own floor or below. A key may name a subpackage ('train.methods'): the
# longest key above a module gives its floor.
FLOORS = {
    # The foundation: imports nothing of graft_jax above it.
    'core': 0, 'sharding': 0, 'backends': 0, 'rewards': 0, 'packing': 0,
    'atomic_file': 0, 'host_fingerprint': 0, 'distributed': 0,
    # The run's settings and the process around it: knows nothing of models or training.
    'config': 1, 'compile_cache': 1, 'preemption': 1,
    'models': 2,
    'data': 3, 'rollout': 3,
    'eval': 4, 'outputs': 4, 'toy': 4,
    # Training knows nothing of the planner or the experiments.
    'train': 5, 'cli': 5,
    'plan': 6, 'experiments': 6, 'walkthrough': 6,
}
TRAIN_MAX_LINES = 3_700
FILE_MAX_LINES = 500
FUNCTION_MAX_LINES = 80
DOC_CAPS = {'README.md': 300, 'BENCHMARKS.md': 250}

# 'path:qualified name' -> its length now, the most it may grow to; each one longer than
# the cap for the reason given.
LONG_FUNCTIONS = {
    # One jitted program: the slot pool's whole decode loop, closures sharing its carry.
    'graft_jax/rollout/slot_pool.py:_pool': 128,
    # The planner's one walk over an engine's phases, each a few lines on shared totals.
    'graft_jax/plan/phases.py:plan_engine': 127,
    # One peer-log record, field by field, in the file's column order.
    'graft_jax/outputs/peer_log.py:PeerLogWriter.write': 100,
    # The update's padded and packed layouts interleaved (issue 66, item 5 splits them).
    'graft_jax/train/update.py:update': 95,
    # The paper's loss: equations in the docstring, one pure function of arrays.
    'graft_jax/core/loss.py:clipped_token_loss': 82,
    # The toy benchmark's cells, run and gathered in one loop.
    'benchmarks/toy/benchmark.py:run_cells': 94,
}

# (path, the line's code, why): a test of a method's identity outside the method's module.
METHOD_DISPATCH_EXCEPTIONS = (
    # SGT's row marker in the rows every method shares (issue 66, item 4 moves it to
    # SGT's own batch columns).
    ('graft_jax/train/update_rows.py', 'ROW_FIELDS = {"adv": np.float32,',
     'SGT column in the shared rows'),
    ('graft_jax/train/update_rows.py', 'return {', 'SGT column in the shared rows'),
    # The K = 3 job's runs are labelled by arm; "grpo" is the baseline run's label, its
    # table's column, and the one run without an exchange to report.
    ('graft_jax/experiments/toy_k3.py', 'presets = {"grpo": "grpo"}', 'run label'),
    ('graft_jax/experiments/toy_k3.py', 'models = {"grpo": members,', 'run label'),
    ('graft_jax/experiments/toy_k3.py', 'summary[name] = {"initial":', 'run label'),
    ('graft_jax/experiments/toy_k3_report.py', 'runs = {"initial":', 'run label'),
    ('graft_jax/experiments/toy_k3_report.py', 'if label == "grpo":', 'run label'),
    ('graft_jax/experiments/toy_k3_report.py', 'if label != "grpo":', 'run label'),
    # The presets are named after the method each one picks: a table of settings.
    ('configs/base.py', 'PRESETS = {', 'preset names'),
)


def _module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
  parts = list(path.relative_to(root).with_suffix('').parts)
  if parts[-1] == '__init__':
    parts = parts[:-1]
  return '.'.join(parts)


def _sources(package: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
  return {_module_name(p, package.parent): p for p in sorted(package.rglob('*.py'))}


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


def _module_graph(package: pathlib.Path = PACKAGE) -> dict[str, set[str]]:
  modules = _sources(package)
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


def test_the_floor_rule_catches_a_climb_and_a_module_on_no_floor(tmp_path):
  pkg = tmp_path / 'graft_jax'
  for d in ('core', 'train', 'fresh'):
    (pkg / d).mkdir(parents=True)
  for f in ('__init__.py', 'core/__init__.py', 'train/__init__.py', 'train/step.py',
            'fresh/__init__.py', 'loose.py'):
    (pkg / f).write_text('')
  (pkg / 'core' / 'x.py').write_text('def f():\n  from graft_jax.train import step\n')
  (pkg / 'train' / 'y.py').write_text('from graft_jax.core import x\n')
  assert rules.floor_breaches(_module_graph(pkg), {'core': 0, 'train': 5}) == [
      'graft_jax.fresh: on no floor', 'graft_jax.loose: on no floor',
      'graft_jax.core.x (floor 0) -> graft_jax.train.step (floor 5)']
  assert rules.floor_of('graft_jax.train.methods.a', {'train': 5, 'train.methods': 6}) == 6


def test_every_module_on_a_floor_importing_nothing_above_it():
  bad = rules.floor_breaches(_module_graph(), FLOORS)
  assert not bad, '\n'.join(bad)
  gone = [k for k in FLOORS if f'graft_jax.{k}' not in _sources()]
  assert not gone, f'FLOORS names what is gone: {gone}'


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


def _scanned():
  """(path relative to the root, source) of every Python file `SOURCES` holds."""
  for top in SOURCES:
    for path in sorted((ROOT / top).rglob('*.py')):
      yield str(path.relative_to(ROOT)), path.read_text()


def test_the_dispatch_reader_sees_every_form():
  names, classes = rules.method_identity(ast.parse(
      'class Hacpo(Method):\n  name = "hacpo"\nclass HacpoLoss:\n  pass\n'))
  assert (names, classes) == ({'hacpo'}, {'Hacpo', 'HacpoLoss'})
  injected = '\n'.join([
      "if cfg.method == 'grpo': pass", "ok = 'hacpo' != self.cfg.method",
      "ok = m.name in ('graft', 'other')", "ok = isinstance(loss, (int, HacpoLoss))",
      "ok = issubclass(t, mod.Hacpo)", "ok = type(m) is Hacpo",
      "match cfg.method:\n  case _: pass", "match m:\n  case Hacpo(): pass",
      "match name:\n  case 'sgt' | 'x': pass", "table = {'graft': f, 'grpo': g}",
      "table = dict(hacpo=f)", "f = TABLE[cfg.method]", "f = TABLE.get(run.method, g)"])
  found = rules.method_dispatch(ast.parse(injected), {'graft', 'grpo', 'hacpo', 'sgt'}, classes)
  assert [form for _, form in found].count('comparison') == 4
  assert {line for line, _ in found} == set(range(1, 17)) - {8, 10, 12}
  plain = "ok = cfg.graft.delta > 0\nf = methods.lookup(cfg.method)\nd = {'delta': 1}\n"
  assert rules.method_dispatch(ast.parse(plain), {'graft'}, {'Graft'}) == []


def test_no_dispatch_on_a_method_outside_its_module():
  """A method's module may name itself; the registry (its package's __init__) all of them;
  any other module asks the method (`METHOD_DISPATCH_EXCEPTIONS` excepted)."""
  files = dict(_scanned())
  own = {path: rules.method_identity(ast.parse(src)) for path, src in files.items()}
  own = {path: ids for path, ids in own.items() if ids[0]}
  names = set().union(*(n for n, _ in own.values()))
  classes = set().union(*(c for _, c in own.values()))
  registries = {str(pathlib.Path(path).parent / '__init__.py') for path in own}
  excused, bad = set(), []
  for path, src in files.items():
    if path in registries:
      continue
    mine_n, mine_c = own.get(path, (set(), set()))
    lines = src.splitlines()
    for line, form in rules.method_dispatch(ast.parse(src), names - mine_n, classes - mine_c):
      code = lines[line - 1].strip()
      hit = [e for e in METHOD_DISPATCH_EXCEPTIONS if e[0] == path and code.startswith(e[1])]
      excused.update(hit)
      if not hit:
        bad.append(f'{path}:{line}: {form}: {code}')
  assert not bad, 'ask the method instead of testing which it is:\n' + '\n'.join(bad)
  stale = set(METHOD_DISPATCH_EXCEPTIONS) - excused
  assert not stale, f'these exceptions excuse nothing now; remove them: {sorted(stale)}'


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


def test_the_function_reader_measures_qualified_spans():
  lengths = rules.function_lengths(ast.parse(
      '@dec\ndef f():\n  def g():\n    pass\n  return g\nclass C:\n  def m(self):\n'
      + '    x = 1\n' * 150))
  assert lengths == {'f': 4, 'f.g': 2, 'C.m': 151}
  assert lengths['C.m'] > FUNCTION_MAX_LINES


def test_no_function_over_the_cap():
  found = {f'{path}:{name}': n for path, src in _scanned()
           for name, n in rules.function_lengths(ast.parse(src)).items()}
  bad = [f'{k}: {n}' for k, n in found.items()
         if n > LONG_FUNCTIONS.get(k, FUNCTION_MAX_LINES)]
  assert not bad, f'over {FUNCTION_MAX_LINES} lines (split it):\n' + '\n'.join(bad)
  stale = [k for k, n in LONG_FUNCTIONS.items() if found.get(k, 0) <= FUNCTION_MAX_LINES]
  assert not stale, f'these fit the cap now (or are gone); remove them: {stale}'


def test_the_timing_reader_flags_measurements_only():
  measured = ('"""four calls took 2.28 s where one took 2.77 s."""\n'
              'def f():\n  """Runs at 1,2 3.5 tokens/s, 41% MFU, 900 GB/s, 12 ms a step."""\n'
              '  # a step of 331 s at 256; done in 3.4 ms; compiles (~10-20 s)\n'
              '  return 1  # 857 s a step, about 30 s of CPU\n')
  hits = [h for _, text in rules.prose(measured) for h in rules.timings(text)]
  assert sorted(hits) == sorted(['2.28 s', '2.77 s', '3.5 tokens/s', '41% MFU', '900 GB/s',
                                 '12 ms', '331 s', '3.4 ms', '~10-20 s', '857 s', '30 s'])
  plain = ('"""Two steps, 8 samples, 3 stages, shapes (4, 128), a 1e-3 step; see s 2."""\n'
           'def f(timeout_s=30):\n  """A timeout in seconds; 16 rows/step, version 2.5.1."""\n'
           '  # a kill grace (SLURM: 30 s, Docker: 10 s); every 20 ms; seconds per step\n'
           '  return 1  # within 10 s of the signal, 10%\n')
  assert [h for _, text in rules.prose(plain) for h in rules.timings(text)] == []


def test_no_measured_timings_in_comments_or_docstrings():
  bad = [f'{path}:{line}: {hit}' for path, src in _scanned()
         for line, text in rules.prose(src) for hit in rules.timings(text)]
  assert not bad, 'timings belong in BENCHMARKS.md; say why, not what was measured:\n' + (
      '\n'.join(bad))
