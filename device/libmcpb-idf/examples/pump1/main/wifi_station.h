/* Joins the Wi-Fi network from Kconfig and keeps rejoining it. */
#ifndef PUMP1_WIFI_STATION_H
#define PUMP1_WIFI_STATION_H

/* Starts the station and waits until it has an address. */
void wifi_station_start(void);

#endif
