from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from rest_framework import generics, serializers
from rest_framework.response import Response

from .models import Build, Command, Project, Version

PROJECT_FIELDS = ["id", "name", "slug", "description", "language", "programming_language", "repo", "repo_type",
                  "default_version", "default_branch", "documentation_type", "users", "canonical_url"]


class ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = PROJECT_FIELDS


class VersionSerializer(serializers.ModelSerializer):
    project = ProjectSerializer()

    class Meta:
        model = Version
        fields = ["id", "project", "slug", "identifier", "verbose_name", "active", "built", "downloads", "type"]


class CommandSerializer(serializers.ModelSerializer):
    class Meta:
        model = Command
        fields = ["id", "build", "command", "description", "start_time", "end_time", "run_time", "exit_code", "output"]


class BuildSerializer(serializers.ModelSerializer):
    project_slug = serializers.CharField(source="project.slug")
    version_slug = serializers.CharField(source="version.slug")
    commands = CommandSerializer(many=True)

    class Meta:
        model = Build
        fields = ["id", "project", "project_slug", "version", "version_slug", "date", "length", "type", "state",
                  "success", "error", "commit", "docs_url", "commands"]


class V1ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        exclude = ["canonical_url"]


class VersionFilter(filters.FilterSet):
    project__slug = filters.CharFilter(field_name="project__slug")

    class Meta:
        model = Version
        fields = ["project__slug", "active"]


class BuildFilter(filters.FilterSet):
    project__slug = filters.CharFilter(field_name="project__slug")

    class Meta:
        model = Build
        fields = ["project__slug", "commit"]


class ProjectDetail(generics.RetrieveAPIView):
    queryset = Project.objects.all()
    serializer_class = ProjectSerializer


class ActiveVersions(generics.GenericAPIView):
    def get(self, request, pk):
        project = get_object_or_404(Project, pk=pk)
        versions = Version.objects.filter(project=project, active=True).select_related("project")
        return Response({"versions": VersionSerializer(versions, many=True).data})


class VersionList(generics.ListAPIView):
    queryset = Version.objects.select_related("project")
    serializer_class = VersionSerializer
    filterset_class = VersionFilter


class BuildList(generics.ListAPIView):
    queryset = Build.objects.select_related("project", "version").prefetch_related("commands")
    serializer_class = BuildSerializer
    filterset_class = BuildFilter


class BuildDetail(generics.RetrieveAPIView):
    queryset = Build.objects.select_related("project", "version").prefetch_related("commands")
    serializer_class = BuildSerializer


class V1ProjectBySlug(generics.RetrieveAPIView):
    queryset = Project.objects.all()
    serializer_class = V1ProjectSerializer
    lookup_field = "slug"


class V1VersionList(generics.ListAPIView):
    queryset = Version.objects.select_related("project")
    serializer_class = VersionSerializer
    filterset_class = VersionFilter
