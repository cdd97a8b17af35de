"""What a run is: the options it is planned with, its cells, its manifest, its rows (native and published layouts), the measurement fields of a row, its folder and the folder's writer lock."""
