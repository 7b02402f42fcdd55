import os

SECRET_KEY = "benchmark-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "drfsite.urls"
WSGI_APPLICATION = "drfsite.wsgi.application"
INSTALLED_APPS = ["django.contrib.contenttypes", "rest_framework", "django_filters", "drfsite"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware", "django.middleware.http.ConditionalGetMiddleware"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["BENCH_SQLITE"]}}
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
REST_FRAMEWORK = {
    "DEFAULT_PAGINATION_CLASS": "drfsite.pagination.Pagination",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
}
