#!/bin/sh
# Seeds the reader's corpus with every golden file: run from the fuzz/ directory.
set -eu
mkdir -p corpus/reader
cp ../golden/cpython-3.15.2/*.bin corpus/reader/
echo "seeded corpus/reader with $(ls corpus/reader | wc -l) files"
