#!/usr/bin/env bash
# Builds tools/bench on its own (Release) into DIR/bin when the main build does not contain the drivers yet.
# Usage: build_drivers.sh DIR   (prints DIR/bin on success)
set -euo pipefail
dir=$1
src=$(cd "$(dirname "$0")/../../tools/bench" && pwd)
mkdir -p "$dir/project"
# A small wrapper project: the same CMakeLists as in the full build, with the two packages it expects.
cat >"$dir/project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(FanStoreBenchDrivers C CXX)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
add_compile_options(-Wall -Wextra)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY \${CMAKE_BINARY_DIR}/bin)
find_package(Threads REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
add_subdirectory($src bench)
CMAKE
cmake -S "$dir/project" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release >"$dir/configure.log" 2>&1
cmake --build "$dir/build" -j "${JOBS:-2}" >"$dir/build.log" 2>&1
echo "$dir/build/bin"
