"""What rows are stamped with about the code that made them."""

from __future__ import annotations

from cnnbench import envinfo


def test_git_sha_names_the_checkout_or_the_commit_it_is_told(monkeypatch):
    monkeypatch.delenv("CNNBENCH_GIT_SHA", raising=False)
    envinfo.git_sha.cache_clear()  # asked once per process
    own = envinfo.git_sha()
    assert own and len(own.split("-")[0]) == 12  # this checkout's commit, -dirty when tracked files changed
    # a copy of a commit's tree with an older .git (another machine) is told which commit it is
    monkeypatch.setenv("CNNBENCH_GIT_SHA", "0123456789ab")
    envinfo.git_sha.cache_clear()
    assert envinfo.git_sha() == "0123456789ab"
    envinfo.git_sha.cache_clear()
