# Shared set-up steps of scripts/test and scripts/run-example (sourced, not run).

setup_venv() {  # setup_venv ".[extra]": create .venv (once) and install the project into it
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e "$1"
}

FASHION_MNIST_DIR=/usr/share/datasets/fashion-mnist

install_dataset() {  # Debian's dataset-fashion-mnist, where this machine can install it
    if [ -f "$FASHION_MNIST_DIR/t10k-images-idx3-ubyte.gz" ]; then
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
            echo "note: cannot install dataset-fashion-mnist (not root); see README 'Data'" >&2
            return 1
        fi
    fi
    if command -v apt-get >/dev/null; then
        $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 \
            || { $sudo apt-get update -qq >/dev/null 2>&1 && $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; } \
            || { echo "note: apt-get could not install dataset-fashion-mnist; see README 'Data'" >&2; return 1; }
    else
        echo "note: no apt-get here; see README 'Data' for getting Fashion-MNIST" >&2
        return 1
    fi
}

install_chromium() {  # Debian's chromium, for the web UI tests (tests/rest); they skip without it
    if [ -x /usr/bin/chromium ]; then
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
            echo "note: cannot install chromium (not root); the browser tests of tests/rest will skip" >&2
            return 1
        fi
    fi
    if command -v apt-get >/dev/null; then
        $sudo apt-get install -y -qq chromium >/dev/null 2>&1 \
            || { $sudo apt-get update -qq >/dev/null 2>&1 && $sudo apt-get install -y -qq chromium >/dev/null 2>&1; } \
            || { echo "note: apt-get could not install chromium; the browser tests of tests/rest will skip" >&2; return 1; }
    else
        echo "note: no apt-get here; install Chromium at /usr/bin/chromium for the browser tests" >&2
        return 1
    fi
}
