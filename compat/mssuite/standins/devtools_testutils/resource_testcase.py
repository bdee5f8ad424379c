"""The resource-group parameter name of the real kit."""

RESOURCE_GROUP_PARAM = "resource_group"
