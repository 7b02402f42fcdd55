from django.urls import path

from . import views

urlpatterns = [
    path("api/v2/project/<int:pk>/", views.ProjectDetail.as_view()),
    path("api/v2/project/<int:pk>/active_versions/", views.ActiveVersions.as_view()),
    path("api/v2/version/", views.VersionList.as_view()),
    path("api/v2/build/", views.BuildList.as_view()),
    path("api/v2/build/<int:pk>/", views.BuildDetail.as_view()),
    path("api/v1/project/<str:slug>/", views.V1ProjectBySlug.as_view()),
    path("api/v1/version/", views.V1VersionList.as_view()),
]
