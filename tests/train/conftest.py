from tests.lab_util import make_lab

__all__ = ["make_lab"]
