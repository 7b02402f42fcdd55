from rest_framework import pagination


class Pagination(pagination.LimitOffsetPagination):
    default_limit = 10
    max_limit = 1000
