"""classroom"""
