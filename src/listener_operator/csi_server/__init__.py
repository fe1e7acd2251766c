"""csi_server"""
