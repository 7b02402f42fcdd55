"""Purge keys: Surrogate-Key and Cache-Tag name every project, version and build a reply shows, within a header a cache takes."""





def test_purge_keys_name_every_project_version_and_build_shown(demo, public):
    builds = demo.get("/api/v2/build/?project__slug=pip&limit=3")
    keys = builds.headers["Surrogate-Key"].split()
    expected = {"v2", "list-v2-build-project-pip", "project-pip"}
    for build in builds.json()["results"]:
        expected |= {f"version-pip-{build['version_slug']}", f"build-{build['id']}"}
    assert set(keys) == expected and len(keys) == len(set(keys))
    # A version embeds its project; a v1 file list names the versions of its pages.
    version = demo.get("/api/v2/version/14/")
    assert version.headers["Surrogate-Key"] == "v2 project-requests version-requests-v2.31.0"
    files = demo.get("/api/v1/file/?limit=2").headers["Cache-Tag"].split(",")
    assert files[0] == "v1" and "project-pip" in files and "version-pip-latest" in files
    search = demo.get("/api/v2/docsearch/?project=pip&version=latest&q=cache").headers["Surrogate-Key"].split()
    assert search[:3] == ["search", "v2", "list-v2-docsearch-project-pip-version-latest"] and "project-pip" in search
    assert demo.get("/api/v1/file/search/?q=pip").headers["Surrogate-Key"].split()[:3] == ["search", "v1", "list-v1-file-search"]
    assert demo.get("/api/v1/file/anchor/?q=pip").headers["Surrogate-Key"].split()[:3] == ["search", "v1", "list-v1-file-anchor"]


def test_purge_keys_of_long_lists_stay_under_the_header_limit():
    from docsrv.edge.keys import MAX_BYTES, purge_keys

    few = ["v2", "project-a", "version-a-1", "build-7"]
    assert purge_keys(few + few) == few
    many_versions = ["v2"] + [k for n in range(600) for k in (f"project-p{n % 5}", f"version-p{n % 5}-{n}.0.0")]
    coarse = purge_keys(many_versions)
    assert coarse == ["v2", "project-p0", "project-p1", "project-p2", "project-p3", "project-p4"]
    many_projects = ["v2"] + [k for n in range(1000) for k in (f"project-some-long-project-name-{n}", f"version-x-{n}")]
    assert purge_keys(many_projects) == ["v2"]
    assert all(sum(len(k) + 1 for k in purge_keys(keys)) <= MAX_BYTES for keys in (few, many_versions, many_projects))


def test_a_list_too_long_to_name_its_items_carries_its_list_s_big_key():
    from docsrv.edge.keys import purge_keys

    builds = ["v1", "list-v1-build"] + [k for n in range(900) for k in (f"project-p{n % 3}", f"version-p{n % 3}-{n}", f"build-{n}")]
    assert purge_keys(builds, "list-v1-build") == ["v1", "list-v1-build", "project-p0", "project-p1", "project-p2", "big-list-v1-build"]
    projects = ["v2", "list-v2-project"] + [f"project-some-long-project-name-{n}" for n in range(1000)]
    assert purge_keys(projects, "list-v2-project") == ["v2", "list-v2-project", "big-list-v2-project"]


def test_list_keys_name_the_endpoint_and_its_filters_without_paging(demo):
    def keys(path):
        return demo.get(path).headers["Surrogate-Key"].split()

    assert keys("/api/v2/version/?project__slug=pip&active=TRUE&limit=2&offset=1")[:2] == ["v2", "list-v2-version-project-pip-active-true"]
    assert keys("/api/v2/project/5/active_versions/")[:2] == ["v2", "list-v2-version-project-attrs-active-true"]
    assert keys("/api/v2/build/?commit=a%20b,c")[:2] == ["v2", "list-v2-build-commit-~" + blake("a b,c")]
    assert keys("/api/v1/version/pip/?active=0")[:2] == ["v1", "list-v1-version-project-pip-active-false"]
    assert keys("/api/v1/project/?users=2&limit=1")[:2] == ["v1", "list-v1-project-users-2"]
    assert keys("/api/v1/user/?username=eric")[:3] == ["v1", "list-v1-user-username-eric", "user-1"]
    assert keys("/api/v1/file/?limit=1")[:2] == ["v1", "list-v1-file"]
    assert keys("/api/v1/user/1/") == ["v1", "user-1"]


def blake(text):
    import hashlib

    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def test_a_long_list_answers_with_a_header_a_cache_takes(demo):
    response = demo.get("/api/v2/build/?limit=1000")
    assert len(response.headers["Surrogate-Key"]) <= 8000
    assert "project-pip" in response.headers["Surrogate-Key"].split()
