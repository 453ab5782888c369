"""The readers behind tests/test_house.py's rules: each takes source (or a module
graph) and returns what breaks the rule, so a test can feed it an injected violation."""

import ast
import io
import re
import tokenize

# A throughput or utilisation is always a measurement.
RATE = re.compile(r'(?<![\w.])\d[\d,.]*\s*(?:(?:tokens|tok|samples|sequences|seqs|rows|steps|it)'
                  r'/s|[GMT]i?B/s|T?FLOP/s|%\s*MFU)(?![\w/])')
# A number of time units; a measurement when `BEFORE` or `AFTER` says so, or `~` precedes it.
TIME = re.compile(r'(?P<about>[~≈]?)(?<![\w.])\d+(?:\.\d+)?(?:\s*[-–]\s*\d+(?:\.\d+)?)?\s*'
                  r'(?:ms|µs|us|ns|s|secs?|seconds?|min|minutes?|hours?)(?![\w/])')
BEFORE = re.compile(r'(?:\b(?:took|takes?|taking|costs?|costing|ran|runs?|running|spent|spends?|'
                    r'measured|lasted|lasts|about|around|roughly|nearly|steps?)[ \t\n]+'
                    r'(?:\S+[ \t\n]+){0,2}|\bin[ \t\n]+)$', re.I)
AFTER = re.compile(r'\s*(?:(?:a|an|per|each|/)\s*(?:step|call|run|batch|minibatch|update|token|row)'
                   r'\b|of\s+(?:CPU|GPU|TPU|wall|compil))', re.I)


def timings(text: str) -> list[str]:
  """The measured timings in ``text``: "took 12 s", "in 3.4 ms", "857 s a step", "~20 s",
  "41% MFU"; not a duration that is a setting ("a kill grace of 30 s", "every 20 ms")."""
  hits = [m.group(0) for m in RATE.finditer(text)]
  for m in TIME.finditer(text):
    if (m.group('about') or BEFORE.search(text[max(0, m.start() - 40):m.start()])
        or AFTER.match(text, m.end())):
      hits.append(m.group(0))
  return hits


def prose(source: str) -> list[tuple[int, str]]:
  """(line, text) of every comment and docstring in ``source``."""
  found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type == tokenize.COMMENT]
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=False)
      if doc:
        found.append((node.body[0].lineno, doc))
  return found


def function_lengths(tree) -> dict[str, int]:
  """Qualified name ('Class.method', 'outer.inner') -> lines, decorators left out."""
  out = {}

  def visit(node, prefix):
    for child in ast.iter_child_nodes(node):
      name = prefix
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        name = f'{prefix}{child.name}'
        if not isinstance(child, ast.ClassDef):
          out[name] = child.end_lineno - child.lineno + 1
        name += '.'
      visit(child, name)

  visit(tree, '')
  return out


def method_identity(tree) -> tuple[set[str], set[str]]:
  """(names, classes) a method's module owns: the ``name = '...'`` of each class that sets
  one, and when it sets one, every class the module defines."""
  names, classes = set(), set()
  for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
    for stmt in cls.body:
      if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == 'name'
                                               for t in stmt.targets)
          and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
        names.add(stmt.value.value)
  if names:
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
  return names, classes


def method_dispatch(tree, names: set[str], classes: set[str]) -> list[tuple[int, str]]:
  """(line, form) of each test of a method's identity: a comparison with ``x.method`` or a
  method's name, ``isinstance``/``issubclass``/``type(x) is`` a method's class, a ``match``
  on one, or a table keyed by method names (a dict literal, ``dict(graft=...)``,
  ``table[cfg.method]``, ``table.get(cfg.method)``)."""

  def named(n):  # a method's name, or a tuple / list / set holding one
    if isinstance(n, ast.Constant):
      return n.value in names or n.value in classes
    return isinstance(n, (ast.Tuple, ast.List, ast.Set)) and any(named(e) for e in n.elts)

  def field(n):  # `<something>.method`: the config's method field
    return isinstance(n, ast.Attribute) and n.attr == 'method'

  def a_class(n):
    return any(isinstance(x, ast.Name) and x.id in classes
               or isinstance(x, ast.Attribute) and x.attr in classes for x in ast.walk(n))

  def pattern(p):
    return any(isinstance(x, ast.MatchValue) and named(x.value)
               or isinstance(x, ast.MatchClass) and a_class(x.cls) for x in ast.walk(p))

  hits = []
  for node in ast.walk(tree):
    form = None
    if isinstance(node, ast.Compare):
      sides = [node.left, *node.comparators]
      if any(named(s) or field(s) or a_class(s) for s in sides):
        form = 'comparison'
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
      if node.func.id in ('isinstance', 'issubclass') and len(node.args) == 2 and a_class(
          node.args[1]):
        form = node.func.id
      elif node.func.id == 'dict' and any(k.arg in names for k in node.keywords):
        form = 'dict'
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
      if node.func.attr == 'get' and node.args and field(node.args[0]):
        form = 'lookup'
    elif isinstance(node, ast.Match):
      if field(node.subject) or any(pattern(c.pattern) for c in node.cases):
        form = 'match'
    elif isinstance(node, ast.Dict) and any(k is not None and named(k) for k in node.keys):
      form = 'dict'
    elif isinstance(node, ast.Subscript) and field(node.slice):
      form = 'lookup'
    if form:
      hits.append((node.lineno, form))
  return hits


def floor_of(module: str, floors: dict[str, int]) -> int | None:
  """The floor of the longest ``floors`` key that is ``module`` or a package above it
  (keys name parts under graft_jax: 'train', 'train.methods'); None when none is."""
  parts = module.split('.')[1:]
  for n in range(len(parts), 0, -1):
    if '.'.join(parts[:n]) in floors:
      return floors['.'.join(parts[:n])]
  return None


def floor_breaches(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
  """Each import of a module on a higher floor, and each module on no floor."""
  bad = [f'{m}: on no floor' for m in sorted(graph)
         if m != 'graft_jax' and floor_of(m, floors) is None]
  for module in sorted(graph):
    here = floor_of(module, floors)
    for target in sorted(graph[module]):
      there = floor_of(target, floors)
      if here is not None and there is not None and there > here:
        bad.append(f'{module} (floor {here}) -> {target} (floor {there})')
  return bad
