# api: sources and tests of this module (see Makefile.am)
