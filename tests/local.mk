# tests: shared harness, black-box tests and the source checker.
