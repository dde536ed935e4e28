#!/usr/bin/env bash
# Runs a Python test driver with FANSTORE_PYTHON (default /usr/bin/python3): the one Python every test uses.
exec "${FANSTORE_PYTHON:-/usr/bin/python3}" "$@"
