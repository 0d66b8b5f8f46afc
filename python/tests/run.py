"""Runs the vmmipc Python tests: with pytest when it is installed, else with
the small runner below (machines where packages cannot be installed, such as
a GPU machine with torch but no pytest).

    mpiexec -n 2 python3 python/tests/run.py [pytest arguments...] [files...]

The fallback knows what these tests use (fixtures by parameter name, with
yield and autouse; raises, skip, importorskip, mark.skipif,
mark.parametrize; tmp_path) and runs the files and their tests in pytest's
order: files sorted, tests as defined, parameters in order. Exit status: 0
passed, 1 failed, 5 nothing collected, as pytest.
"""
import contextlib
import inspect
import os
import pathlib
import sys
import tempfile
import traceback
import types

HERE = pathlib.Path(__file__).resolve().parent


class Skipped(Exception):
    pass


def fake_pytest():
    m = types.ModuleType("pytest")

    class RaisesInfo:
        value = None

    @contextlib.contextmanager
    def raises(exc):
        info = RaisesInfo()
        try:
            yield info
        except exc as e:  # noqa: B902 - exc is a class or a tuple of classes
            info.value = e
            return
        raise AssertionError(f"DID NOT RAISE {exc}")

    def skip(reason="", allow_module_level=False):
        raise Skipped(reason)

    def importorskip(name):
        try:
            return __import__(name)
        except ImportError:
            raise Skipped(f"could not import {name}")

    def fixture(fn=None, autouse=False):
        def mark(f):
            f._fixture, f._autouse = True, autouse
            return f
        return mark(fn) if fn else mark

    def skipif(cond, reason=""):
        def mark(f):
            if cond:
                f._skip = reason
            return f
        return mark

    def parametrize(names, values):
        def mark(f):
            keys = [n.strip() for n in names.split(",")]
            rows = [v if len(keys) > 1 else (v,) for v in values]
            f._params = [dict(zip(keys, row)) for row in rows]
            return f
        return mark

    m.raises, m.skip, m.importorskip, m.fixture = raises, skip, importorskip, fixture
    m.mark = types.SimpleNamespace(skipif=skipif, parametrize=parametrize)
    return m


def call_with_fixtures(fn, pools, stack, given=None):
    """Calls fn with its parameters resolved as fixtures (or given); teardowns go on stack."""
    kwargs = dict(given or {})
    for name in inspect.signature(fn).parameters:
        if name in kwargs:
            continue
        if name == "tmp_path":
            kwargs[name] = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            continue
        fx = next((p[name] for p in pools if name in p and getattr(p[name], "_fixture", False)), None)
        if fx is None:
            raise TypeError(f"unknown fixture {name!r}")
        kwargs[name] = setup_fixture(fx, pools, stack)
    return fn(**kwargs)


def setup_fixture(fx, pools, stack):
    out = call_with_fixtures(fx, pools, stack)
    if inspect.isgenerator(out):
        value = next(out)
        stack.callback(lambda: next(out, None))
        return value
    return out


def run_file(path, counts):
    name = path.stem
    try:
        mod = __import__(name)
    except Skipped as e:
        print(f"{path.name}: SKIPPED ({e})", flush=True)
        counts["skipped"] += 1
        return
    conftest = sys.modules.get("conftest")
    pools = [vars(mod)] + ([vars(conftest)] if conftest else [])
    autouse = [f for p in pools for f in p.values() if getattr(f, "_autouse", False)]
    for tname, fn in list(vars(mod).items()):
        if not (tname.startswith("test_") and inspect.isfunction(fn)):
            continue
        for given in getattr(fn, "_params", None) or [None]:
            label = f"{path.name}::{tname}" + (f"[{'-'.join(map(str, given.values()))}]" if given else "")
            if getattr(fn, "_skip", None) is not None:
                print(f"{label} SKIPPED ({fn._skip})", flush=True)
                counts["skipped"] += 1
                continue
            try:
                with contextlib.ExitStack() as stack:
                    for f in autouse:
                        setup_fixture(f, pools, stack)
                    call_with_fixtures(fn, pools, stack, given)
                print(f"{label} PASSED", flush=True)
                counts["passed"] += 1
            except Skipped as e:
                print(f"{label} SKIPPED ({e})", flush=True)
                counts["skipped"] += 1
            except Exception:
                print(f"{label} FAILED", flush=True)
                traceback.print_exc()
                counts["failed"] += 1


def main(argv):
    try:
        import pytest
        return pytest.main(argv or [str(HERE)])
    except ImportError:
        pass
    sys.modules["pytest"] = fake_pytest()
    sys.path.insert(0, str(HERE))
    files = [pathlib.Path(a) for a in argv if a.endswith(".py") and not a.startswith("-")]
    ignored = {pathlib.Path(a.split("=", 1)[1]).resolve() for a in argv if a.startswith("--ignore=")}
    if not files:
        dirs = [pathlib.Path(a) for a in argv if not a.startswith("-") and os.path.isdir(a)] or [HERE]
        files = sorted(p for d in dirs for p in d.glob("test_*.py"))
    files = [f.resolve() for f in files if f.resolve() not in ignored]
    import conftest  # noqa: F401  (its fixtures; sets the device)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for f in files:
        run_file(f, counts)
    print(f"run.py (without pytest): {counts['failed']} failed, {counts['passed']} passed, "
          f"{counts['skipped']} skipped", flush=True)
    if counts["failed"]:
        return 1
    return 0 if counts["passed"] else 5


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
