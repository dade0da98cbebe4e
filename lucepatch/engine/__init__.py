"""The series engine: one implementation of "apply these patches onto that commit", shared by
apply, check, build, verify, pr and ci so they can never disagree."""
