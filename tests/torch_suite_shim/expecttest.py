"""What torch.testing._internal.common_utils needs of `expecttest`, which Debian does not package.

common_utils reads ACCEPT (whether to rewrite expected strings in place) and
derives its TestCase from TestCase here; distributed_test.py calls no
assertExpectedInline, so the comparison below is only a plain equality.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 - expecttest's name
        self.assertEqual(actual, expect)
