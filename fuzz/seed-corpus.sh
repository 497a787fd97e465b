#!/bin/sh
# Seeds both targets' corpora with every golden file: run from the fuzz/ directory.
set -eu
for target in reader counts; do
    mkdir -p corpus/$target
    cp ../golden/cpython-3.15.2/*.bin corpus/$target/
    echo "seeded corpus/$target with $(ls corpus/$target | wc -l) files"
done
