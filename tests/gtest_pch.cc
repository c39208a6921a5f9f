// The translation unit that carries the test binaries' precompiled GoogleTest header
// (tests/CMakeLists.txt, strata_test_pch): a binary with GoogleTest's main and no tests.
