"""Agent hosts: the scaffolds that drive the skill under test."""
