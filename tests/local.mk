# tests: shared harness, black-box tests and the source checker.
TESTS += tests/checksrc.sh
EXTRA_DIST += tests/checksrc.sh
