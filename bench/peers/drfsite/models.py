from django.db import models


class Project(models.Model):
    name = models.TextField()
    slug = models.TextField(unique=True)
    description = models.TextField()
    language = models.TextField()
    programming_language = models.TextField()
    repo = models.TextField()
    repo_type = models.TextField()
    default_version = models.TextField()
    default_branch = models.TextField()
    documentation_type = models.TextField()
    users = models.JSONField()
    canonical_url = models.TextField()
    analytics_code = models.TextField()
    copyright = models.TextField()
    crate_url = models.TextField()
    framework_packages_url = models.TextField()
    project_url = models.TextField()
    requirements_file = models.TextField()
    suffix = models.TextField()
    theme = models.TextField()
    use_virtualenv = models.BooleanField()
    version = models.TextField()
    pub_date = models.DateTimeField()
    modified_date = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "projects"
        ordering = ["slug"]


class Version(models.Model):
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING, related_name="versions")
    slug = models.TextField()
    identifier = models.TextField()
    verbose_name = models.TextField()
    active = models.BooleanField()
    built = models.BooleanField()
    uploaded = models.BooleanField()
    type = models.TextField()
    downloads = models.JSONField()

    class Meta:
        managed = False
        db_table = "versions"
        ordering = ["-verbose_name", "id"]


class Build(models.Model):
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING)
    version = models.ForeignKey(Version, on_delete=models.DO_NOTHING)
    date = models.DateTimeField()
    length = models.IntegerField()
    type = models.TextField()
    state = models.TextField()
    success = models.BooleanField()
    error = models.TextField()
    commit = models.TextField(db_column="commit_hash")
    output = models.TextField()
    setup = models.TextField()
    setup_error = models.TextField()
    docs_url = models.TextField()

    class Meta:
        managed = False
        db_table = "builds"
        ordering = ["-date", "-id"]


class Command(models.Model):
    build = models.ForeignKey(Build, on_delete=models.DO_NOTHING, related_name="commands")
    command = models.TextField()
    description = models.TextField()
    start_time = models.DateTimeField()
    end_time = models.DateTimeField()
    run_time = models.IntegerField()
    exit_code = models.IntegerField()
    output = models.TextField()

    class Meta:
        managed = False
        db_table = "commands"
        ordering = ["start_time"]
