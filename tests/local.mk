# tests: shared harness, black-box tests and the source checker.
TESTS += tests/checksrc.sh
EXTRA_DIST += tests/checksrc.sh

# The chaos run: by hand, not in TESTS (it runs for minutes on the real
# clock; HACKING.md).
EXTRA_DIST += tests/chaos/chaos.py

# Black-box tests (Python 3 stdlib, TAP).  Automake does not distribute
# TESTS by itself: list each tests/bb/*.py in EXTRA_DIST too.
TESTS += tests/bb/test_harness_selftest.py tests/bb/test_lifecycle.py
EXTRA_DIST += tests/bb/harness.py tests/bb/receiver.py tests/bb/README.md \
	tests/bb/test_harness_selftest.py tests/bb/test_lifecycle.py
TESTS += tests/conf_keys.sh
EXTRA_DIST += tests/conf_keys.sh
TESTS += tests/bb/test_dispatch.py
EXTRA_DIST += tests/bb/test_dispatch.py

# The journal and recovery (issue 6): SQLite always, MySQL through a private
# mariadbd each file starts (tests/mariadb.sh).
TESTS += tests/bb/test_journal_restore.py tests/bb/test_journal_state.py \
	tests/bb/test_journal_crash.py tests/bb/test_journal_outage.py
EXTRA_DIST += tests/bb/test_journal_lib.py \
	tests/bb/test_journal_restore.py tests/bb/test_journal_state.py \
	tests/bb/test_journal_crash.py tests/bb/test_journal_outage.py
TESTS += tests/bb/test_journal_dedup.py
EXTRA_DIST += tests/bb/test_journal_dedup.py
TESTS += tests/bb/test_journal_model.py
EXTRA_DIST += tests/bb/test_journal_model.py
TESTS += tests/bb/test_cluster.py
EXTRA_DIST += tests/bb/test_cluster.py
TESTS += tests/bb/test_cluster3.py
EXTRA_DIST += tests/bb/test_cluster3.py
