"""Read by train.py with exec() from the working directory: a config file named as a plain
argument is run over the defaults, then --key=value flags override single settings (the
value is read as a Python literal when it is one, else kept as text)."""
import ast
import sys

for _arg in sys.argv[1:]:
    if not _arg.startswith("--"):
        exec(open(_arg).read())
        continue
    _key, _value = _arg[2:].split("=", 1)
    if _key not in globals():
        raise ValueError(f"unknown setting: {_key}")
    try:
        _value = ast.literal_eval(_value)
    except (SyntaxError, ValueError):
        pass
    globals()[_key] = _value
