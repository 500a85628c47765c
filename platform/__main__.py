"""``python -m ndebench.platform``: the ``ndebench`` command line."""
from ndebench.platform.cli.main import run

if __name__ == "__main__":
    run()
